import { useCallback, useEffect, useRef, useState } from "preact/hooks";
import { EdgecronError } from "../../src/client/index.ts";

export interface Loaded<T> {
  data: T | undefined;
  error: string | null;
  loading: boolean;
  reload: () => void;
}

/** Loads with `load`, again when `deps` change and every `refreshMs` if given (a page that watches runs). */
export function useApi<T>(load: () => Promise<T>, deps: unknown[], refreshMs?: number): Loaded<T> {
  const [data, setData] = useState<T>();
  const [error, setError] = useState<string | null>(null);
  const [loading, setLoading] = useState(true);
  const generation = useRef(0);
  // `deps` name what `load` depends on, as in useEffect.
  const reload = useCallback(() => {
    const mine = ++generation.current;
    load().then(
      (value) => {
        if (mine !== generation.current) return; // an older answer arriving late
        setData(value);
        setError(null);
        setLoading(false);
      },
      (err) => {
        if (mine !== generation.current) return;
        setError(messageOf(err));
        setLoading(false);
      },
    );
  }, deps);
  useEffect(() => {
    setLoading(true);
    reload();
    if (!refreshMs) return;
    const timer = setInterval(reload, refreshMs);
    return () => clearInterval(timer);
  }, [reload, refreshMs]);
  return { data, error, loading, reload };
}

/** An API refusal as a person reads it: the message, then each field and what is wrong with it. */
export function messageOf(err: unknown): string {
  if (err instanceof EdgecronError) {
    const issues = err.issues?.map((issue) => `${issue.path}: ${issue.message}`).join("; ");
    return issues ? `${err.message} (${issues})` : err.message;
  }
  return err instanceof Error ? err.message : String(err);
}
