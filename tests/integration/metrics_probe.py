#!/usr/bin/env python3
"""HTTP probes of rgapsd's metrics_listen for tests/integration/metrics_http.sh.

  metrics_probe.py get HOST PORT PATH [METHOD]   one request: prints the status, then the body
  metrics_probe.py bounds HOST PORT              the server's bounds (below); prints "ok: ..."
                                                 lines, exits 1 with "FAIL: ..." on the first miss

bounds: from one address at most 4 connections are held (a 5th is closed
unanswered); a request whose line and headers pass 16 KiB is refused; a
connection that sends part of a request and then nothing is closed by the
server (after 5 s; waited for at most 30 s); while connections are held idle,
a scrape from them is refused but the next, once they are gone, is served.
Every wait is bounded.
"""
import select
import socket
import sys
import time


def connect(host, port):
    s = socket.create_connection((host, port), timeout=10)
    s.settimeout(10)
    return s


def request(host, port, path, method="GET", extra=b""):
    """(status, body); (None, b"") when the server closed or reset the connection unanswered."""
    s = connect(host, port)
    data = b""
    try:
        s.sendall(f"{method} {path} HTTP/1.1\r\nHost: {host}\r\n".encode() + extra +
                  b"Connection: close\r\n\r\n")
        while True:
            chunk = s.recv(65536)
            if not chunk:
                break
            data += chunk
    except ConnectionError:
        data = b""
    finally:
        s.close()
    if not data:
        return None, b""
    head, _, body = data.partition(b"\r\n\r\n")
    return int(head.split(b" ", 2)[1]), body


def closed_by_server(s, within):
    """True once the server has closed s (EOF or reset), waiting at most `within` s."""
    end = time.monotonic() + within
    while time.monotonic() < end:
        s.settimeout(max(0.05, end - time.monotonic()))
        try:
            if s.recv(4096) == b"":
                return True
        except socket.timeout:
            return False
        except ConnectionError:
            return True
    return False


def fail(msg):
    print(f"FAIL: {msg}")
    sys.exit(1)


def bounds(host, port):
    # Four idle connections are held; more from the same address are closed unanswered.
    held = [connect(host, port) for _ in range(6)]
    refused, end = [], time.monotonic() + 10
    while len(refused) < 2 and time.monotonic() < end:
        ready, _, _ = select.select([s for s in held if s not in refused], [], [],
                                    max(0.0, end - time.monotonic()))
        refused += [s for s in ready if closed_by_server(s, 0.1)]
    if len(refused) < 2:
        fail(f"6 connections from one address: {6 - len(refused)} held, at most 4 allowed")
    held = [s for s in held if s not in refused]
    print(f"ok: 6 connections from one address: {len(held)} held, {len(refused)} closed at once")
    status, _ = request(host, port, "/metrics") if len(held) == 4 else (None, b"")
    if len(held) == 4 and status is not None:
        fail(f"a 5th connection was served ({status}) while 4 were held")
    # The server closes them: a connection that sends nothing for 5 s.
    t0 = time.monotonic()
    for s in held:
        if not closed_by_server(s, 30):
            fail("an idle connection was still open 30 s later (connection timeout 5 s)")
        s.close()
    print(f"ok: the server closed the idle connections ({time.monotonic() - t0:.1f} s)")
    # (the server counts a connection out once its thread has cleaned it up, a moment
    # after the close we saw: until then it may still refuse this address)
    end = time.monotonic() + 10
    status, body = request(host, port, "/metrics")
    while status != 200 and time.monotonic() < end:
        time.sleep(0.1)
        status, body = request(host, port, "/metrics")
    if status != 200 or b"rgaps_daemon_uptime_seconds" not in body:
        fail(f"10 s after they were closed a scrape still got {status}")
    print("ok: served again once they were gone")
    # Part of a request, then nothing: closed by the server.
    s = connect(host, port)
    s.sendall(b"GET /metr")
    if not closed_by_server(s, 30):
        fail("a request left half-sent was still open 30 s later")
    s.close()
    print("ok: a half-sent request was closed by the server")
    # A request larger than 16 KiB: refused (an error status, or closed unanswered).
    status, _ = request(host, port, "/metrics", extra=b"X-Big: " + b"x" * 32768 + b"\r\n")
    if status == 200:
        fail("a request of 32 KiB of headers was served")
    print(f"ok: 32 KiB of headers refused ({status if status else 'closed unanswered'})")
    status, _ = request(host, port, "/metrics")
    while status != 200 and time.monotonic() < end + 20:
        time.sleep(0.1)
        status, _ = request(host, port, "/metrics")
    if status != 200:
        fail(f"after the large request a scrape got {status}")


def main():
    if sys.argv[1] == "get":
        status, body = request(sys.argv[2], int(sys.argv[3]), sys.argv[4],
                               sys.argv[5] if len(sys.argv) > 5 else "GET")
        print(status)
        sys.stdout.write(body.decode())
    elif sys.argv[1] == "bounds":
        bounds(sys.argv[2], int(sys.argv[3]))
    else:
        sys.exit(f"usage: {sys.argv[0]} get|bounds ...")


if __name__ == "__main__":
    main()
