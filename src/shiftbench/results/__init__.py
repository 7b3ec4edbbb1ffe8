"""The results layer: what a run leaves behind, below both the engine that writes it and the report that reads it.

- :mod:`.store`: the SQLite store of runs, conditions, results, batches, predictions, per-sample values and
  artifacts (``Store``, ``Condition``, ``params_key``, ``canonical_json``, ``spec_hash``);
- :mod:`.records`: the typed records a reader gets (``Run``, ``Row``, ``Samples``, ``Prediction``) and the one
  loader, ``load(store, runs, parts)``, that the report, the export, the leaderboard and the demo read through;
- :mod:`.database`: the SQLite file below the store (``Database``: opening, the schema and its version,
  refusing a foreign or damaged file, write transactions with busy retries);
- :mod:`.artifacts`: every artifact key a step writes, spelled once, with its reader;
- :mod:`.codec`: the metric-state codec (``encode_state`` / ``decode_state``) of the per-batch states;
- :mod:`.identity`: a stored run identity's key, and what changed between two identities.

It imports only shiftbench's core modules (errors, seeds), never the engine or the report.
"""
