/**
 * How `edgecron backfill` covers a long range: the API backfills at most a fixed number of fires
 * per call (1,000) and refuses a range that holds more, and the CLI cannot count a schedule's
 * fires itself. So it asks for slices of the range, sized by what the last answer showed: half
 * the span after a refusal, and after an answer a span that should hold about 90% of the limit
 * at the density just seen (twice the span when it held no fire). Pure: times in ms, no calls.
 */

/** A closed range [from, to] of instants in ms. */
export interface Slice {
  from: number;
  to: number;
}

export const FIRES_PER_CALL = 1_000;

/** The first slice: the whole range, which one call takes when it holds few enough fires. */
export function firstSlice(from: number, to: number): Slice {
  return { from, to };
}

/** The slice to ask for after `done` was refused for holding too many fires. */
export function halved(done: Slice): Slice {
  if (done.to <= done.from) throw new Error(`a slice of one instant (${new Date(done.from).toISOString()}) was refused as too many fires`);
  return { from: done.from, to: done.from + Math.floor((done.to - done.from) / 2) };
}

/** The slice after `done`, which held `fires` fires, or null when `done` reached `end`. */
export function nextSlice(done: Slice, fires: number, end: number): Slice | null {
  if (done.to >= end) return null;
  const span = done.to - done.from + 1;
  const nextSpan = fires === 0 ? span * 2 : Math.max(1, Math.floor((span * FIRES_PER_CALL * 0.9) / fires));
  const from = done.to + 1;
  return { from, to: Math.min(end, from + nextSpan - 1) };
}

/** How much of [from, end] is covered once `done` is: 0 to 1. */
export function covered(from: number, end: number, done: Slice): number {
  return end === from ? 1 : (done.to - from + 1) / (end - from + 1);
}
