/** One request the loopback receiver recorded (shared by Node and workerd tests). */
export interface Hit {
  method: string;
  path: string;
  /** The URL as the request addressed it (its Host and target, query included). */
  url: string;
  headers: Record<string, string>;
  body: string;
  /** The body's bytes, base64: what a binary body was. */
  bodyBase64: string;
  receivedAt: number;
}
