import type { Job, Run } from "../../src/client/index.ts";

/**
 * A run's state as a badge: colour for the eye and always the word, so that the state is
 * read without telling colours apart (the colours are in style.css, one per state).
 */
export function RunState({ state }: { state: Run["state"] }) {
  return <span class={`badge state-${state}`}>{state.replace("_", " ")}</span>;
}

export function jobState(job: Job): "paused" | "completed" | "active" {
  return job.paused ? "paused" : job.completed ? "completed" : "active";
}

export function JobState({ job }: { job: Job }) {
  const state = jobState(job);
  return <span class={`badge job-${state}`}>{state}</span>;
}
