"""A permalink whose id matches nothing: 404 with what kind of link it was, from every page of
that kind (its charts, exports and actions included), never a 500."""
import pytest
from django.test import Client
from django.urls import reverse

from factories import user

pytestmark = pytest.mark.django_db

RUN, REPORT, COMPARISON, DECISION = ("No run has this link.", "No report has this link.",
                                     "No comparison has this link.", "No decision has this link.")
PERMALINKS = [  # (route, arguments after the id, message)
    ("run-detail", [], RUN), ("run-progress", [], RUN), ("run-export", [], RUN), ("run-requests-csv", [], RUN),
    ("run-chart", ["throughput", "json"], RUN), ("run-chart", ["timeline", "csv"], RUN),
    ("import-detail", [], REPORT), ("import-chart", ["json"], REPORT), ("import-chart", ["csv"], REPORT),
    ("comparison-detail", [], COMPARISON), ("comparison-chart", ["json"], COMPARISON),
    ("decision-detail", [], DECISION),
]


def get(url: str, member: bool = False, method: str = "get"):
    client = Client(raise_request_exception=False)
    if member:
        client.force_login(user())
    return getattr(client, method)(url)


def said(response) -> str:
    return response.content.decode()


@pytest.mark.parametrize("route, args, message", PERMALINKS)
@pytest.mark.parametrize("member", [False, True])
def test_an_unknown_id_is_a_404_that_says_which_kind_of_link_it_was(route, args, message, member):
    r = get(reverse(route, args=["nOSuchId_0123456789abcd", *args]), member)
    assert r.status_code == 404 and f'<p class="not-found">{message}</p>' in said(r)


def test_cancelling_an_unknown_run_is_the_same_404():
    r = get(reverse("run-cancel", args=["nOSuchId_0123456789abcd"]), member=True, method="post")
    assert r.status_code == 404 and RUN in said(r)


@pytest.mark.parametrize("public_id", ["a" * 40, "x%00y", "%C3%A9t%C3%A9", "a.b", "%20"])
def test_an_id_no_link_could_have_is_the_same_404(public_id):
    # Decision links take any text up to the slash: such ids are answered without a lookup.
    r = get(f"/d/{public_id}/")
    assert r.status_code == 404 and DECISION in said(r)


def test_an_address_no_route_knows_is_a_plain_404():
    r = get("/no/such/page/")
    assert r.status_code == 404 and '<p class="not-found">There is nothing at this address.</p>' in said(r)
