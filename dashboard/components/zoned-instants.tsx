import { zoned } from "../lib/zone.ts";

/**
 * A schedule's next instants in its zone, the clock changes marked where they fall; `since` is
 * where the list starts (now by default), so a change before the first instant is marked too.
 */
export function ZonedInstants({ instants, timeZone, since }: { instants: string[]; timeZone: string; since?: Date }) {
  const rows = zoned(instants, timeZone, since ?? new Date());
  return (
    <table class="instants">
      <caption>Next runs in {timeZone}</caption>
      <thead>
        <tr>
          <th scope="col">Local time</th>
          <th scope="col">Offset</th>
          <th scope="col">UTC</th>
        </tr>
      </thead>
      <tbody>
        {rows.map((row) => (
          <tr key={row.iso} class={row.clockChange ? "clock-change" : undefined}>
            <td>
              {row.local}
              {row.clockChange && <span class="dst-note">{row.clockChange}</span>}
            </td>
            <td>{row.offset}</td>
            <td>
              <time dateTime={row.iso}>{row.iso.replace("T", " ").replace(".000Z", "Z")}</time>
            </td>
          </tr>
        ))}
      </tbody>
    </table>
  );
}
