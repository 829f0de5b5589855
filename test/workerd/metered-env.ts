import { env } from "cloudflare:test";

/**
 * The test's own count of what the sweep spends, kept at the bindings and apart from the
 * sweep's meter: a bug in that meter must not hide from the test that checks it.
 */
export interface Spent {
  queries: string[];
  /** Each query's bound parameters, in the same order as `queries`: to ask SQLite for its plan. */
  params: unknown[][];
  shardCalls: Array<{ shard: string; method: string }>;
}

/**
 * `batch: true` lets D1 batches through, each statement counted as a query (the Worker's cost
 * meter writes in one); the sweep's tests keep the default, which throws on any batch.
 */
export function meteredEnv({ batch = false } = {}): { env: Env; spent: Spent } {
  const spent: Spent = { queries: [], params: [], shardCalls: [] };
  // D1's batch takes only its own statements, not proxies of them.
  const unwrapped = new WeakMap<D1PreparedStatement, { stmt: D1PreparedStatement; sql: string; params: unknown[] }>();
  const statement = (sql: string, stmt: D1PreparedStatement, params: unknown[] = []): D1PreparedStatement => {
    const proxy = new Proxy(stmt, {
      get(target, prop) {
        const value = Reflect.get(target, prop, target) as unknown;
        if (typeof value !== "function") return value;
        if (prop === "bind") return (...args: unknown[]) => statement(sql, target.bind(...args), args);
        if (prop === "first" || prop === "all" || prop === "run" || prop === "raw") {
          return (...args: unknown[]) => {
            spent.queries.push(sql);
            spent.params.push(params);
            return Reflect.apply(value as (...a: unknown[]) => unknown, target, args);
          };
        }
        return (value as (...a: unknown[]) => unknown).bind(target);
      },
    });
    unwrapped.set(proxy, { stmt, sql, params });
    return proxy;
  };
  const db = new Proxy(env.DB, {
    get(target, prop) {
      if (prop === "prepare") return (sql: string) => statement(sql, target.prepare(sql));
      if (prop === "batch" && !batch) throw new Error("the sweep was not expected to batch");
      if (prop === "batch") {
        return (statements: D1PreparedStatement[]) => {
          const own = statements.map((s) => unwrapped.get(s) ?? { stmt: s, sql: "(unknown)", params: [] });
          for (const { sql, params } of own) {
            spent.queries.push(sql);
            spent.params.push(params);
          }
          return target.batch(own.map((s) => s.stmt));
        };
      }
      const value = Reflect.get(target, prop, target) as unknown;
      return typeof value === "function" ? value.bind(target) : value;
    },
  });
  const names = new Map<string, string>();
  const shard = new Proxy(env.SHARD, {
    get(target, prop) {
      if (prop === "idFromName") {
        return (name: string) => {
          const id = target.idFromName(name);
          names.set(id.toString(), name);
          return id;
        };
      }
      if (prop === "get") {
        return (id: DurableObjectId) => {
          const stub = target.get(id);
          const name = names.get(id.toString()) ?? id.toString();
          return new Proxy(stub, {
            get(s, method) {
              const value = Reflect.get(s, method, s) as unknown;
              if (typeof value !== "function" || typeof method !== "string") return value;
              return (...args: unknown[]) => {
                spent.shardCalls.push({ shard: name, method });
                return Reflect.apply(value as (...a: unknown[]) => unknown, s, args);
              };
            },
          });
        };
      }
      const value = Reflect.get(target, prop, target) as unknown;
      return typeof value === "function" ? value.bind(target) : value;
    },
  });
  return { env: { ...env, DB: db, SHARD: shard } as Env, spent };
}
