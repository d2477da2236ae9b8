"""History addresses keyed with the site's key: each stored level's fingerprint (an unkeyed digest
of its model, GPUs and workload, which an outsider could compute) becomes the HMAC of it that
history.workload_fingerprint now gives, so existing histories stay whole and their links stop
being guessable."""
import hashlib
import hmac

from django.conf import settings
from django.db import migrations


# history.keyed as it was when this migration was written, frozen here.
def keyed(digest: str) -> str:
    return hmac.new(settings.SECRET_KEY.encode(), f"history:{digest}".encode(), hashlib.sha256).hexdigest()[:16]


def key_fingerprints(apps, schema_editor):
    LevelResult = apps.get_model("benchmarks", "LevelResult")
    for digest in LevelResult.objects.exclude(fingerprint="").values_list("fingerprint", flat=True).distinct():
        LevelResult.objects.filter(fingerprint=digest).update(fingerprint=keyed(digest))


class Migration(migrations.Migration):
    dependencies = [("benchmarks", "0024_host_price")]
    # Back, the keyed addresses stay: an HMAC cannot be undone (levels measured afterwards by older
    # code would start a new history).
    operations = [migrations.RunPython(key_fingerprints, migrations.RunPython.noop)]
