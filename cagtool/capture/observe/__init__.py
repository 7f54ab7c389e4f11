"""What cagtool reads from torch while the job runs: every compiled-autograd capture and its graph
(ca_observer.py, graph_dump.py), torch's structured log (torch_logs.py), DDP's reducer
(ddp_watch.py), the user's source line behind a node or call (source.py), and keeping cagtool's
own frames out of Dynamo (dynamo_skip.py). docs/torch-internals.md lists the torch internals each
relies on."""
