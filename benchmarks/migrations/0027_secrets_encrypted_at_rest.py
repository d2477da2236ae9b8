"""Endpoint API keys and webhook secrets encrypted at rest (benchmarks/fields.py): the columns become
text (a token is longer than its secret), then every stored secret is encrypted in place; back, each
is decrypted in place before the columns are character fields again."""
from django.db import migrations

import benchmarks.fields

SECRETS = (("endpoint", "api_key"), ("endpoint", "webhook_secret"), ("schedule", "webhook_secret"))


def _rewrite(apps, schema_editor, how):
    for model_name, field in SECRETS:
        model = apps.get_model("benchmarks", model_name)
        table = schema_editor.connection.ops.quote_name(model._meta.db_table)
        column = schema_editor.connection.ops.quote_name(field)
        with schema_editor.connection.cursor() as cursor:  # raw: the stored text, not the field's reading
            cursor.execute(f"SELECT id, {column} FROM {table} WHERE {column} <> ''")
            rows = cursor.fetchall()
            for pk, stored in rows:
                cursor.execute(f"UPDATE {table} SET {column} = %s WHERE id = %s", [how(stored), pk])


def encrypt_stored(apps, schema_editor):
    _rewrite(apps, schema_editor, lambda stored: stored if stored.startswith(benchmarks.fields.TOKEN_PREFIX)
             else benchmarks.fields.encrypt(stored))


def decrypt_stored(apps, schema_editor):
    _rewrite(apps, schema_editor, benchmarks.fields.decrypt)


class Migration(migrations.Migration):

    dependencies = [
        ('benchmarks', '0026_prediction_ledger'),
    ]

    operations = [
        migrations.AlterField(
            model_name='endpoint',
            name='api_key',
            field=benchmarks.fields.EncryptedTextField(blank=True, max_length=300),
        ),
        migrations.AlterField(
            model_name='endpoint',
            name='webhook_secret',
            field=benchmarks.fields.EncryptedTextField(blank=True, max_length=200),
        ),
        migrations.AlterField(
            model_name='schedule',
            name='webhook_secret',
            field=benchmarks.fields.EncryptedTextField(blank=True, max_length=200),
        ),
        migrations.RunPython(encrypt_stored, decrypt_stored),
    ]
