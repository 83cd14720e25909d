"""Whether a request that changes something comes from the dashboard's own pages.

Browsers name where a request comes from: ``Sec-Fetch-Site`` (current browsers), else
``Origin`` (on every cross-origin POST; ``null`` from a sandboxed or privacy-stripped
page, refused), else ``Referer``; the pages' ``Referrer-Policy: same-origin`` keeps the
last two on the dashboard's own requests. A form POSTed by another site (a forged sign-in
with the attacker's token, say) names that site and is refused. A request naming none
of them (a script, ``curl``) is not a browser's cross-site request and goes on. The
origin is compared with the ``Host`` the request was sent to (scheme aside: a TLS proxy
in front changes it).
"""

from typing import Final
from urllib.parse import urlsplit

from starlette.requests import Request

SAME_SITE_FETCHES: Final = frozenset({"same-origin", "none"})


def cross_site(request: Request) -> bool:
    """Whether *request* was sent by a page of another origin."""
    host = request.headers.get("host", "").lower()
    fetch_site = request.headers.get("sec-fetch-site")
    if fetch_site is not None:
        return fetch_site not in SAME_SITE_FETCHES
    origin = request.headers.get("origin")
    if origin is not None:
        return origin == "null" or urlsplit(origin).netloc.lower() != host
    referer = request.headers.get("referer")
    if referer is not None:
        return urlsplit(referer).netloc.lower() != host
    return False
