"""An asyncio trainer that saves a checkpoint on Ctrl-C. `loop.add_signal_handler` sets Python's
wakeup fd to the loop's own; once the signal came, the default handler is back while it saves,
so a second SIGINT would interrupt the save. Under python a Ctrl-C is one SIGINT: the save
completes and the script exits 0."""

import asyncio
import signal

import torch


async def main() -> None:
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    loop.add_signal_handler(signal.SIGINT, stop.set)
    model = torch.nn.Linear(2, 2)
    step = 0
    while not stop.is_set():
        model(torch.ones(1, 2)).sum().backward()
        step += 1
        if step == 2:
            print("READY", flush=True)
        await asyncio.sleep(0.01)
    loop.remove_signal_handler(signal.SIGINT)
    print("SAVING", flush=True)
    await asyncio.sleep(2)  # writing the checkpoint
    print("SAVED", flush=True)


asyncio.run(main())
