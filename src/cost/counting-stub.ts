/** A Durable Object stub whose every method call is counted: each RPC call is a billed request of the object called. */
export function countingStub<T extends object>(stub: T, onCall: () => void): T {
  return new Proxy(stub, {
    get(target, prop) {
      const value = Reflect.get(target, prop);
      if (typeof value !== "function") return value;
      return (...args: unknown[]) => {
        onCall();
        // Reflect.apply: on an RPC stub, `value.apply` would be a remote method named "apply".
        return Reflect.apply(value, target, args);
      };
    },
  });
}
