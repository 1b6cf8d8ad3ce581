"""A QUIC perf-protocol peer on aioquic, an independent QUIC implementation, for the tests
of `wirebench run --quic-perf` (this as the server) and `wirebench serve --quic-perf-port`
(this as the client).

The protocol (draft-banks-quic-performance, ALPN "perf"): the client opens a bidirectional
stream, writes the number of bytes it wants back (8 bytes, big-endian), then what it uploads,
and ends its side; the server reads to the end, then sends that many bytes and ends its side.

    server --port P            serves; prints `listening PORT sha256:HEX` (the SHA-256 of its
                               key's SubjectPublicKeyInfo, what --quic-pin takes), then one
                               JSON line per stream when it is done:
                               {"received": N, "sent": M, "asked": M}
    client --port P --upload N --download M [--streams K]
                               runs K streams at once; prints one JSON line:
                               {"sent": K*N, "received": bytes, "asked": K*M}
"""

import argparse
import asyncio
import datetime
import hashlib
import json
import ssl
import sys

from aioquic.asyncio import QuicConnectionProtocol, connect, serve
from aioquic.quic.configuration import QuicConfiguration
from aioquic.quic.events import StreamDataReceived, StreamReset
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

CHUNK = 64 * 1024


def certificate():
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "perf")])
    now = datetime.datetime.now(datetime.timezone.utc)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(days=1))
        .not_valid_after(now + datetime.timedelta(days=1))
        .sign(key, hashes.SHA256())
    )
    spki = key.public_key().public_bytes(
        serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo
    )
    return cert, key, "sha256:" + hashlib.sha256(spki).hexdigest()


class PerfServer(QuicConnectionProtocol):
    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.streams = {}

    def quic_event_received(self, event):
        if isinstance(event, StreamReset):
            self.streams.pop(event.stream_id, None)
            return
        if not isinstance(event, StreamDataReceived):
            return
        st = self.streams.setdefault(event.stream_id, {"head": b"", "asked": None, "got": 0})
        data = event.data
        if st["asked"] is None:
            need = 8 - len(st["head"])
            st["head"] += data[:need]
            data = data[need:]
            if len(st["head"]) == 8:
                st["asked"] = int.from_bytes(st["head"], "big")
        st["got"] += len(data)
        if event.end_stream:
            asyncio.ensure_future(self.answer(event.stream_id, st))

    async def answer(self, stream_id, st):
        asked = st["asked"] or 0
        left = asked
        zeros = bytes(CHUNK)
        while left > 0:
            n = min(left, CHUNK)
            self._quic.send_stream_data(stream_id, zeros[:n])
            self.transmit()
            left -= n
            # Let the stack send and take acknowledgements: the buffer stays small.
            await asyncio.sleep(0)
        self._quic.send_stream_data(stream_id, b"", end_stream=True)
        self.transmit()
        print(json.dumps({"received": st["got"], "sent": asked, "asked": asked}), flush=True)


async def run_server(port):
    cert, key, pin = certificate()
    config = QuicConfiguration(is_client=False, alpn_protocols=["perf"])
    config.certificate = cert
    config.private_key = key
    server = await serve("127.0.0.1", port, configuration=config, create_protocol=PerfServer)
    port = server._transport.get_extra_info("sockname")[1]
    print(f"listening {port} {pin}", flush=True)
    await asyncio.Event().wait()


async def one_stream(client, upload, download):
    reader, writer = await client.create_stream()
    writer.write(download.to_bytes(8, "big"))
    zeros = bytes(CHUNK)
    left = upload
    while left > 0:
        n = min(left, CHUNK)
        writer.write(zeros[:n])
        left -= n
        await writer.drain()
    writer.write_eof()
    got = 0
    while True:
        d = await reader.read(CHUNK)
        if not d:
            break
        got += len(d)
    return got


async def run_client(port, upload, download, streams):
    config = QuicConfiguration(is_client=True, alpn_protocols=["perf"])
    config.verify_mode = ssl.CERT_NONE
    async with connect("127.0.0.1", port, configuration=config) as client:
        work = asyncio.ensure_future(
            asyncio.gather(*(one_stream(client, upload, download) for _ in range(streams)))
        )
        # A server that closes the connection (at a limit) ends the streams' waits.
        closed = asyncio.ensure_future(client.wait_closed())
        done, _ = await asyncio.wait({work, closed}, return_when=asyncio.FIRST_COMPLETED)
        # Closed by the server (its streams then end too, perhaps first): an error, with
        # the server's reason.
        event = client._quic._close_event
        if work not in done or (event is not None and event.error_code != 0):
            work.cancel()
            reason = event.reason_phrase if event is not None else ""
            raise ConnectionError(f"closed by the server: {reason}")
        closed.cancel()
        got = work.result()
    print(
        json.dumps({"sent": upload * streams, "received": sum(got), "asked": download * streams}),
        flush=True,
    )


def main():
    p = argparse.ArgumentParser()
    p.add_argument("mode", choices=["server", "client"])
    p.add_argument("--port", type=int, default=0)
    p.add_argument("--upload", type=int, default=0)
    p.add_argument("--download", type=int, default=0)
    p.add_argument("--streams", type=int, default=1)
    p.add_argument("--timeout", type=float, default=20)
    a = p.parse_args()
    if a.mode == "server":
        asyncio.run(run_server(a.port))
    else:
        try:
            asyncio.run(
                asyncio.wait_for(run_client(a.port, a.upload, a.download, a.streams), a.timeout)
            )
        except Exception as e:  # the test reads why, in one line
            print(json.dumps({"error": f"{type(e).__name__}: {e}"}), flush=True)
            return 1


if __name__ == "__main__":
    sys.exit(main())
