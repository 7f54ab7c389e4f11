"""What a mode (eager, aot, ca) does to torch, in any process of the job (mode_setup.py), and
compiled autograd for one thread's backwards only, for the Python API's block (thread_scope.py)."""
