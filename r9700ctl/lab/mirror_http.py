"""The lab mirror's HTTP server: Python's static file server, plus one redirect.

Run as a script (`python3 mirror_http.py PORT ADDRESS DIRECTORY [PREFIX=URL]`), so that it imports
the standard library only. A request below PREFIX is answered with a 302 to URL plus the rest of
the path: the lab's cut of Debian (r9700ctl/lab/debian_subset.py) serves its own index, and apt on a
node fetches each package from the Debian mirror through the lab's apt-cacher-ng (the node's apt
sends a redirect's new URL through its configured proxy as any other).
"""

from __future__ import annotations

import functools
import http.server
import sys


class MirrorHandler(http.server.SimpleHTTPRequestHandler):
    redirects: tuple[tuple[str, str], ...] = ()

    def send_head(self):  # type: ignore[no-untyped-def]  # SimpleHTTPRequestHandler's own hook
        path = self.path.split("?", 1)[0]
        for prefix, target in self.redirects:
            if path.startswith(prefix) and ".." not in path:
                self.send_response(302)
                self.send_header("Location", target + path[len(prefix) :])
                self.send_header("Content-Length", "0")
                self.end_headers()
                return None
        return super().send_head()


def main(argv: list[str]) -> int:
    port, address, directory, *redirects = argv
    pairs = tuple(tuple(item.split("=", 1)) for item in redirects)
    handler = type("Handler", (MirrorHandler,), {"redirects": pairs})
    server = http.server.ThreadingHTTPServer(
        (address, int(port)), functools.partial(handler, directory=directory)
    )
    server.serve_forever()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
