-- The background re-seal (src/reconcile/resealing.ts): the key every sealed target was last
-- found sealed under (NULL: not yet, or a round is under way), the last job id the round has
-- looked at, and how many jobs still held a target under another key when a round last ended
-- (GET /metrics shows it; 0: the old keys may go).
ALTER TABLE sweep_state ADD COLUMN resealed_under TEXT;
ALTER TABLE sweep_state ADD COLUMN reseal_after TEXT NOT NULL DEFAULT '';
ALTER TABLE sweep_state ADD COLUMN reseal_remaining INTEGER;
