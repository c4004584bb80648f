"""The durable session contract (``../shared/session-contract/SPEC.md``).

Pure core: ``framing`` (bytes to strict JSON lines), ``digests`` (canonical JSON and digests), ``reducer``
(log to state), ``planner`` (state and configuration to the next safe action), ``materialize`` (plan to
facts). I/O shell: ``store`` (the only code that touches a session file).
"""
