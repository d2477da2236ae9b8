import os

from celery import Celery

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "v100site.settings")

app = Celery("v100site")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()
