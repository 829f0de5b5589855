import type { ShardMigration } from "./shard-migration";

export const step: ShardMigration = {
  version: 10,
  name: "alarm lag in the cost meter",
  // How late alarms started (alarm-lag.ts), as counts per bucket (lags above the bound
  // before and at most this one, in ms; then above 300,000) and their sum in ms. Like
  // starts, added to whichever row the meter writes next.
  sql: `
ALTER TABLE cost_minutes ADD COLUMN alarm_lag_le_10ms INTEGER NOT NULL DEFAULT 0;
ALTER TABLE cost_minutes ADD COLUMN alarm_lag_le_25ms INTEGER NOT NULL DEFAULT 0;
ALTER TABLE cost_minutes ADD COLUMN alarm_lag_le_50ms INTEGER NOT NULL DEFAULT 0;
ALTER TABLE cost_minutes ADD COLUMN alarm_lag_le_100ms INTEGER NOT NULL DEFAULT 0;
ALTER TABLE cost_minutes ADD COLUMN alarm_lag_le_250ms INTEGER NOT NULL DEFAULT 0;
ALTER TABLE cost_minutes ADD COLUMN alarm_lag_le_500ms INTEGER NOT NULL DEFAULT 0;
ALTER TABLE cost_minutes ADD COLUMN alarm_lag_le_1000ms INTEGER NOT NULL DEFAULT 0;
ALTER TABLE cost_minutes ADD COLUMN alarm_lag_le_2500ms INTEGER NOT NULL DEFAULT 0;
ALTER TABLE cost_minutes ADD COLUMN alarm_lag_le_5000ms INTEGER NOT NULL DEFAULT 0;
ALTER TABLE cost_minutes ADD COLUMN alarm_lag_le_10000ms INTEGER NOT NULL DEFAULT 0;
ALTER TABLE cost_minutes ADD COLUMN alarm_lag_le_60000ms INTEGER NOT NULL DEFAULT 0;
ALTER TABLE cost_minutes ADD COLUMN alarm_lag_le_300000ms INTEGER NOT NULL DEFAULT 0;
ALTER TABLE cost_minutes ADD COLUMN alarm_lag_above INTEGER NOT NULL DEFAULT 0;
ALTER TABLE cost_minutes ADD COLUMN alarm_lag_sum_ms INTEGER NOT NULL DEFAULT 0;`,
};
