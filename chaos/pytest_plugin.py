"""pytest plugin (entry point ``pytest11``): collects scenario files as test items.

pytest loads this module in every run of the environment, so it imports nothing heavy at load time.
"""
