"""Pure analysis: arrays and records in, verdicts, findings and alert transitions out. No I/O here."""
