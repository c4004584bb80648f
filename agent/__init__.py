"""killpoint's durable tool-calling agent.

The system under test of the chaos harness, and a usable agent in its own right. Its start path is
stdlib-only (it is launched thousands of times per campaign): nothing here may import pydantic, click,
rich, psutil or httpx, and nothing here may start a thread or open a socket at import time (the fork-server
launcher of a later issue forks a pre-imported agent).
"""
