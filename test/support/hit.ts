/** One request the loopback receiver recorded (shared by Node and workerd tests). */
export interface Hit {
  method: string;
  path: string;
  headers: Record<string, string>;
  body: string;
  receivedAt: number;
}
