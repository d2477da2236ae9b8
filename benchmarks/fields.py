"""Secrets kept encrypted at rest: an endpoint's API key and a webhook's signing secret are stored
as Fernet tokens (cryptography's AES-128-CBC with HMAC-SHA256), whose key is derived (HKDF-SHA256)
from the site's SECRET_KEY (var/secret_key, or the environment in production), never kept in the
database: a copy of the database alone gives none of them away. A value stored before encryption
(plain text) reads as it is until the migration that encrypts it has run."""
from __future__ import annotations

import base64
import logging
from functools import lru_cache

from cryptography.fernet import Fernet, InvalidToken
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.kdf.hkdf import HKDF
from django.conf import settings
from django.db import models

log = logging.getLogger(__name__)
TOKEN_PREFIX = "gAAAAA"  # every Fernet token's first bytes (version 0x80), base64


@lru_cache(maxsize=4)
def _fernet(secret_key: str) -> Fernet:
    key = HKDF(algorithm=hashes.SHA256(), length=32, salt=None, info=b"v100site secrets at rest").derive(
        secret_key.encode())
    return Fernet(base64.urlsafe_b64encode(key))


def encrypt(plain: str) -> str:
    return _fernet(settings.SECRET_KEY).encrypt(plain.encode()).decode() if plain else ""


def decrypt(stored: str) -> str:
    """The secret; a value stored before encryption as it is; "" (logged) for a token made with
    another key (the site's key changed: set the secret again)."""
    if not stored or not stored.startswith(TOKEN_PREFIX):
        return stored or ""
    try:
        return _fernet(settings.SECRET_KEY).decrypt(stored.encode()).decode()
    except InvalidToken:
        log.warning("a stored secret was encrypted with another SECRET_KEY: it reads as unset until set again")
        return ""


class EncryptedTextField(models.TextField):
    """A text field stored encrypted; read and written as plain text. Never filtered on: equal
    secrets are stored as different tokens."""

    def from_db_value(self, value, expression, connection):
        return decrypt(value) if value is not None else value

    def get_prep_value(self, value):
        value = super().get_prep_value(value)
        return encrypt(value) if value else value
