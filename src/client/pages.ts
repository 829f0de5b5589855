/** A page of a cursor-paginated list, as every list route answers. */
export interface Page<T> {
  items: T[];
  nextCursor: string | null;
}

/** Every item of a list, page after page, following `nextCursor` until there is none. */
export async function* everyItem<T>(page: (cursor: string | undefined) => Promise<Page<T>>): AsyncGenerator<T> {
  let cursor: string | undefined;
  do {
    const { items, nextCursor } = await page(cursor);
    yield* items;
    cursor = nextCursor ?? undefined;
  } while (cursor !== undefined);
}
