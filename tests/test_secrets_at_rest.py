"""Endpoint API keys and webhook secrets are stored encrypted (benchmarks/fields.py): the database
holds a token that does not contain the secret, the product reads the secret, the migration
encrypts what was stored in plain text and going back decrypts it."""
import pytest
from django.core.management import call_command
from django.db import connection

from benchmarks import fields
from benchmarks.models import Endpoint, Schedule
from factories import endpoint, user

KEY = "sk-live-0123456789abcdef"


def stored(table: str, column: str, pk: int) -> str:
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT {column} FROM {table} WHERE id = %s", [pk])
        return cursor.fetchone()[0]


@pytest.mark.django_db
def test_an_api_key_and_a_webhook_secret_are_stored_as_tokens_and_read_as_themselves():
    e = endpoint(api_key=KEY)
    raw = stored("benchmarks_endpoint", "api_key", e.pk)
    assert raw.startswith(fields.TOKEN_PREFIX) and KEY not in raw
    assert Endpoint.objects.get(pk=e.pk).api_key == KEY
    s = Schedule.objects.create(name="nightly", owner=user(), template={}, webhook_url="https://example.com/hook",
                                webhook_secret="whsec-abc123")
    raw = stored("benchmarks_schedule", "webhook_secret", s.pk)
    assert raw.startswith(fields.TOKEN_PREFIX) and "whsec-abc123" not in raw
    assert Schedule.objects.get(pk=s.pk).webhook_secret == "whsec-abc123"
    assert endpoint(name="no-key").api_key == "" and stored("benchmarks_endpoint", "api_key",
                                                           Endpoint.objects.get(name="no-key").pk) == ""


@pytest.mark.django_db
def test_a_token_of_another_site_key_reads_as_unset_not_as_an_error(settings):
    e = endpoint(api_key=KEY)
    settings.SECRET_KEY = "another-key-" + "x" * 50
    assert Endpoint.objects.get(pk=e.pk).api_key == ""


@pytest.mark.django_db(transaction=True)
def test_the_migration_encrypts_what_was_stored_in_plain_text_and_going_back_decrypts_it():
    e = endpoint(api_key=KEY)
    call_command("migrate", "benchmarks", "0026", verbosity=0)
    try:
        assert stored("benchmarks_endpoint", "api_key", e.pk) == KEY  # back: plain text, as before
    finally:
        call_command("migrate", "benchmarks", verbosity=0)
    raw = stored("benchmarks_endpoint", "api_key", e.pk)
    assert raw.startswith(fields.TOKEN_PREFIX) and KEY not in raw
    assert Endpoint.objects.get(pk=e.pk).api_key == KEY
