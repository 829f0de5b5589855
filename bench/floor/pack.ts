/** One queue message of the floor: a ticker's dispatches due at `scheduledAt`, for the consumer to call. */
export interface Pack {
  url: string;
  /** Calls waiting at once per consumer invocation: the platform's six unless lifted to see what that limit costs. */
  connections: number;
  kind: "burst" | "steady" | "warmup";
  scheduledAt: number;
  indexes: number[];
}
