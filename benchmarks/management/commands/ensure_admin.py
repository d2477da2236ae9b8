import secrets

from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand


class Command(BaseCommand):
    help = "Create the 'admin' superuser on first start, with a random password kept in var/."

    def handle(self, *args, **options):
        User = get_user_model()
        path = settings.VAR_DIR / "admin-password"
        if User.objects.filter(is_superuser=True).exists():
            if path.exists():
                self.stdout.write(f"Log in as 'admin' with the password in {path}")
            return
        password = secrets.token_urlsafe(12)
        User.objects.create_superuser("admin", "", password)
        path.write_text(password + "\n")
        path.chmod(0o600)
        self.stdout.write(f"Created superuser 'admin'; its password is in {path}: {password}")
