/** The median of the values given (nulls left out): the middle one, or the mean of the two middle ones; null when none. */
export function median(values: ReadonlyArray<number | null | undefined>): number | null {
  const sorted = values.filter((v): v is number => typeof v === "number" && !Number.isNaN(v)).sort((a, b) => a - b);
  if (sorted.length === 0) return null;
  const mid = Math.floor(sorted.length / 2);
  return sorted.length % 2 === 1 ? sorted[mid]! : (sorted[mid - 1]! + sorted[mid]!) / 2;
}
