"""killpoint's durable tool-calling agent.

The system under test of the chaos harness, and a usable agent in its own right. Its start path is
stdlib-only (it is launched thousands of times per campaign): nothing here may import pydantic, click,
rich, psutil or httpx, and nothing here may start a thread, open a socket or read the environment at import time:
the harness's zygote launcher imports ``agent.warm`` once and forks every agent from it (chaos/zygote.py).
"""
