"""A TCP proxy that adds a fixed round-trip time, to put the Firestore emulator "in another
building": on loopback an RPC costs ~1 ms, from Cloud Run to Firestore several. Each direction is
delayed by half the RTT; bytes keep their order and pipelining is not limited.

    python bench/latency_proxy.py --listen 127.0.0.1:9001 --target 127.0.0.1:8080 --rtt-ms 5
"""

from __future__ import annotations

import argparse
import asyncio
import time


async def pump(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, delay: float) -> None:
    queue: asyncio.Queue[tuple[float, bytes]] = asyncio.Queue()

    async def deliver() -> None:
        while True:
            due, data = await queue.get()
            if not data:
                break
            wait = due - time.monotonic()
            if wait > 0:
                await asyncio.sleep(wait)
            writer.write(data)
            await writer.drain()
        writer.close()

    sender = asyncio.create_task(deliver())
    try:
        while data := await reader.read(65536):
            queue.put_nowait((time.monotonic() + delay, data))
    except ConnectionError:
        pass
    queue.put_nowait((0.0, b""))
    await sender


async def serve(listen: str, target: str, rtt_ms: float) -> None:
    host, port = target.rsplit(":", 1)
    delay = rtt_ms / 2000

    async def handle(client_reader: asyncio.StreamReader, client_writer: asyncio.StreamWriter) -> None:
        try:
            server_reader, server_writer = await asyncio.open_connection(host, int(port))
        except OSError:
            client_writer.close()
            return
        await asyncio.gather(
            pump(client_reader, server_writer, delay), pump(server_reader, client_writer, delay), return_exceptions=True
        )

    listen_host, listen_port = listen.rsplit(":", 1)
    server = await asyncio.start_server(handle, listen_host, int(listen_port))
    print("ready", flush=True)
    async with server:
        await server.serve_forever()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--listen", required=True)
    parser.add_argument("--target", required=True)
    parser.add_argument("--rtt-ms", type=float, required=True)
    args = parser.parse_args()
    asyncio.run(serve(args.listen, args.target, args.rtt_ms))
