import type { ShardMigration } from "./shard-migration";

export const step: ShardMigration = {
  version: 18,
  name: "the cost meter's tally in one row a minute",
  // The meter wrote a row per operation each time it wrote (two or three: the call, `settle`,
  // the alarm), and a shard with nothing due soon writes after every call, so metering cost
  // more rows than the runs it counted. A minute's tally is now one row, every operation's
  // counts in it as JSON (meter.ts, `Tally`); the rows kept so far become tallies. The old
  // table is emptied, not dropped: a release from before this step, rolled back to, meters
  // into it (what it counts there is not read once this release is back).
  sql: `
CREATE TABLE cost_tallies (
minute INTEGER PRIMARY KEY,        -- epoch minutes
tally TEXT NOT NULL                -- JSON: every operation's counts, the meter's own rows, starts, alarm lags
);
INSERT INTO cost_tallies (minute, tally)
SELECT minute, json_object(
'ops', json_group_object(operation, json_array(calls, rows_read, rows_written, queue_messages, gate_requests, runs_finished)),
'meter', json_array(SUM(meter_rows_read), SUM(meter_rows_written)),
'starts', SUM(starts),
'lags', json_array(
  SUM(alarm_lag_le_10ms), SUM(alarm_lag_le_25ms), SUM(alarm_lag_le_50ms), SUM(alarm_lag_le_100ms),
  SUM(alarm_lag_le_250ms), SUM(alarm_lag_le_500ms), SUM(alarm_lag_le_1000ms), SUM(alarm_lag_le_2500ms),
  SUM(alarm_lag_le_5000ms), SUM(alarm_lag_le_10000ms), SUM(alarm_lag_le_60000ms), SUM(alarm_lag_le_300000ms),
  SUM(alarm_lag_above), SUM(alarm_lag_sum_ms)))
FROM cost_minutes GROUP BY minute;
DELETE FROM cost_minutes;`,
};
