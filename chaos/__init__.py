"""killpoint's crash-injection chaos harness.

Launches an agent as a real subprocess, SIGKILLs it at named durable-log checkpoints, restarts it, and
proves with independent invariants (``chaos.oracle``) that nothing acknowledged was lost and nothing was
done twice. ``chaos`` may import ``agent.session`` (the reference reducer); ``agent`` never imports ``chaos``.
"""
