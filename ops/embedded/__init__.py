"""The embedded stack `memstream up` runs: one supervisor, its children kept alive.

- supervision.py: child processes, the restart policy of our own processes, the stop signals;
- broker.py: tansu, its local S3 store and the SCRAM gate;
- postgres.py: the embedded Postgres (cluster, password, database);
- app.py: the app process, its workers and the generations' workers;
- stack.py: `run(settings)`, which starts them in order and supervises them.
"""
