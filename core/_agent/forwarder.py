"""The forwarder that runs inside the sandbox, in front of a CLI agent.

It listens on 127.0.0.1 (an ephemeral port, in the sandbox's own network namespace:
bwrap's sandbox has no other network) and copies each connection to evalctl's model
proxy through the Unix socket in the attempt's TMPDIR, the only way out. It prints its
port on its first line and runs until the sandbox ends it. Standard library only: its
source is handed to the sandbox's python3 with `-c`, so this module is never imported.

Usage: python3 -c SOURCE SOCKET_PATH
"""

import asyncio
import os
import sys

CHUNK = 65536


async def copy(reader, writer):
    try:
        while True:
            data = await reader.read(CHUNK)
            if not data:
                break
            writer.write(data)
            await writer.drain()
    except (ConnectionError, OSError):
        pass


async def serve(socket_name):
    async def handle(client_reader, client_writer):
        try:
            upstream_reader, upstream_writer = await asyncio.open_unix_connection(socket_name)
        except OSError:
            client_writer.close()
            return
        upward = asyncio.ensure_future(copy(client_reader, upstream_writer))
        # The answer decides when a connection is over: the proxy closes after each one.
        await copy(upstream_reader, client_writer)
        upward.cancel()
        for writer in (client_writer, upstream_writer):
            writer.close()

    server = await asyncio.start_server(handle, "127.0.0.1", 0)
    print(server.sockets[0].getsockname()[1], flush=True)
    await server.serve_forever()


def main():
    path = sys.argv[1]
    # A Unix socket path is limited to about 100 bytes: connect relative to its directory.
    os.chdir(os.path.dirname(path) or ".")
    asyncio.run(serve(os.path.basename(path)))


if __name__ == "__main__":
    main()
