/**
 * The Worker's cost meter: D1 rows read and written (from each result's `meta`) and calls to
 * tenant gates, counted per invocation through wrapped bindings, so that no caller of the
 * catalog changes. Requests to shards are counted by the shards themselves.
 */
import { countingStub } from "./counting-stub";

export interface WorkerCounts {
  rowsRead: number;
  rowsWritten: number;
  gateRequests: number;
}

type Meta = { rows_read?: number; rows_written?: number };

export class D1Meter {
  readonly counts: WorkerCounts = { rowsRead: 0, rowsWritten: 0, gateRequests: 0 };

  /** `env` with its catalog and gate bindings counted. */
  wrap(env: Env): Env {
    return { ...env, DB: this.database(env.DB), TENANT_GATE: this.gates(env.TENANT_GATE) };
  }

  private add(meta: Meta | undefined): void {
    this.counts.rowsRead += meta?.rows_read ?? 0;
    this.counts.rowsWritten += meta?.rows_written ?? 0;
  }

  private database(db: D1Database): D1Database {
    const inner = new WeakMap<object, D1PreparedStatement>();
    const statement = (stmt: D1PreparedStatement): D1PreparedStatement => {
      const wrapped = {
        bind: (...values: unknown[]) => statement(stmt.bind(...values)),
        run: async () => {
          const r = await stmt.run();
          this.add(r.meta);
          return r;
        },
        all: async () => {
          const r = await stmt.all();
          this.add(r.meta);
          return r;
        },
        // first() hides its meta: the same query through all(), which reads the same rows.
        first: async (column?: string) => {
          const r = await stmt.all<Record<string, unknown>>();
          this.add(r.meta);
          const row = r.results[0] ?? null;
          return column === undefined ? row : ((row?.[column] as unknown) ?? null);
        },
        raw: (options?: { columnNames?: boolean }) => stmt.raw(options as { columnNames: true }),
      } as unknown as D1PreparedStatement;
      inner.set(wrapped, stmt);
      return wrapped;
    };
    return new Proxy(db, {
      get: (target, prop) => {
        if (prop === "prepare") return (query: string) => statement(target.prepare(query));
        if (prop === "batch")
          return async (statements: D1PreparedStatement[]) => {
            const results = await target.batch(statements.map((s) => inner.get(s) ?? s));
            for (const r of results) this.add(r.meta);
            return results;
          };
        const value = Reflect.get(target, prop);
        return typeof value === "function" ? value.bind(target) : value;
      },
    });
  }

  private gates(ns: Env["TENANT_GATE"]): Env["TENANT_GATE"] {
    const onCall = () => {
      this.counts.gateRequests++;
    };
    return new Proxy(ns, {
      get: (target, prop) => {
        if (prop === "get") return (...args: Parameters<typeof target.get>) => countingStub(target.get(...args), onCall);
        const value = Reflect.get(target, prop);
        return typeof value === "function" ? value.bind(target) : value;
      },
    });
  }
}
