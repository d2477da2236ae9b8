"""The served OpenAPI schema, exercised by a property-based API tester (Schemathesis) against the
live app: every operation with generated valid and invalid input, as a member with a token.
Nothing it sends may produce a 5xx, and what comes back must be JSON the schema describes."""
import pytest
import schemathesis
from hypothesis import HealthCheck, settings as hypothesis_settings
from schemathesis import checks
from schemathesis.specs.openapi import checks as openapi_checks

from benchmarks import services
from factories import endpoint, measured_run, user

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def api_schema(live_server, settings):
    settings.API_RATE_LIMIT = "100000/min"  # the tester's requests are not what is measured here
    return schemathesis.openapi.from_url(f"{live_server.url}/api/v1/schema/?format=json")


@pytest.fixture
def token(db):
    endpoint(name="sim")
    measured_run([endpoint(name="other", url="http://127.0.0.1:8")], requests=5, owner=user("alice"))
    return services.api_token_create(owner=user("alice"), name="fuzz")[1]


def test_no_generated_request_gets_a_server_error_or_an_undescribed_answer(api_schema, token, live_server):
    from hypothesis import given

    from schemathesis.generation import GenerationMode

    operations = [result.ok() for result in api_schema.get_all_operations()]
    assert len(operations) >= 8
    tried = []
    for operation in operations:
        for mode in (GenerationMode.POSITIVE, GenerationMode.NEGATIVE):
            @given(case=operation.as_strategy(generation_mode=mode))
            @hypothesis_settings(max_examples=15, deadline=None, database=None,
                                 suppress_health_check=list(HealthCheck))
            def exercise(case):
                response = case.call(base_url=live_server.url, headers={"Authorization": f"Bearer {token}"})
                tried.append((operation.label, response.status_code))
                case.validate_response(response, checks=[
                    checks.not_a_server_error, openapi_checks.response_schema_conformance,
                    openapi_checks.content_type_conformance])
            exercise()
    assert {label for label, _ in tried} == {op.label for op in operations}
