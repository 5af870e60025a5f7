"""Fleet memory: every validate run in one SQLite database, trends and baselines from it.

`store` opens the database (stdlib sqlite3, WAL, schema versioned by PRAGMA user_version and
migrated forward), `record` turns validate reports into rows (GPUs by serial or PCI address,
so a card that moved slots is still followed), `compare` applies the agent's three-gate
regression rule (r9700ctl/agent/baseline.py) to a run against a saved or the last baseline.
A damaged database is one line with its path (HistoryDamaged) and never blocks a validate run.
"""
