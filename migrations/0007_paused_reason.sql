-- Why a job is paused when edgecron paused it itself (pauseAfterFailures); NULL when a person
-- paused it or it runs. Set and cleared with `paused`, in the same statement.
ALTER TABLE jobs ADD COLUMN paused_reason TEXT;
