"""Django settings, read from the environment with embedded defaults (DESIGN 1 and 5).

With nothing set, everything runs in one process: SQLite under `var/`, Celery eager, the
in-memory channel layer, files under `var/`, and the offline model. `DATABASE_URL` and
`REDIS_URL` switch to PostgreSQL and Redis; `OPENAI_BASE_URL` / `OPENAI_API_KEY` to a
real model endpoint. A bad value stops start-up with a message naming the variable.
"""

from __future__ import annotations

from pathlib import Path

from django.core.exceptions import ImproperlyConfigured

from agentsite.env import Env, database_from_url, sqlite_database

BASE_DIR = Path(__file__).resolve().parent.parent
VAR_DIR = BASE_DIR / "var"
VAR_DIR.mkdir(exist_ok=True)

env = Env()

DEBUG = env.boolean("DJANGO_DEBUG", False)
SECRET_KEY = env.string("DJANGO_SECRET_KEY", "")
if not SECRET_KEY:
    # A stable key per checkout, so sessions survive restarts of `make run`.
    key_file = VAR_DIR / "secret_key"
    if not key_file.exists():
        import secrets

        key_file.write_text(secrets.token_urlsafe(50))
    SECRET_KEY = key_file.read_text().strip()
ALLOWED_HOSTS = env.strings("DJANGO_ALLOWED_HOSTS", ["127.0.0.1", "localhost", "testserver", "[::1]"])
CSRF_TRUSTED_ORIGINS = env.strings("DJANGO_CSRF_TRUSTED_ORIGINS", [])

INSTALLED_APPS = [
    "daphne",
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "rest_framework",
    "rest_framework.authtoken",
    "drf_spectacular",
    "channels",
    "sessions_app",
    "runs",
    "skills_app",
    "evolution_app",
]

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
]

ROOT_URLCONF = "agentsite.urls"
ASGI_APPLICATION = "agentsite.asgi.application"
WSGI_APPLICATION = "agentsite.wsgi.application"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [BASE_DIR / "templates"],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
            ],
        },
    },
]

# -- database ---------------------------------------------------------------------------
DATABASE_URL = env.url("DATABASE_URL", schemes=("postgres", "postgresql", "pgsql", "sqlite"))
DATABASES = {
    "default": database_from_url(DATABASE_URL, base_dir=BASE_DIR)
    if DATABASE_URL
    else sqlite_database(VAR_DIR / "agentsite.sqlite3")
}
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

# -- redis: broker, channel layer, locks --------------------------------------------------
REDIS_URL = env.url("REDIS_URL", schemes=("redis", "rediss", "unix"))
if REDIS_URL:
    CHANNEL_LAYERS = {
        "default": {"BACKEND": "channels_redis.core.RedisChannelLayer", "CONFIG": {"hosts": [REDIS_URL]}}
    }
    CELERY_BROKER_URL = REDIS_URL
    CELERY_TASK_ALWAYS_EAGER = False
else:
    CHANNEL_LAYERS = {"default": {"BACKEND": "channels.layers.InMemoryChannelLayer"}}
    CELERY_BROKER_URL = "memory://"
    CELERY_TASK_ALWAYS_EAGER = True
CELERY_TASK_EAGER_PROPAGATES = True
CELERY_RESULT_BACKEND = None
CELERY_TASK_ACKS_LATE = True
CELERY_WORKER_PREFETCH_MULTIPLIER = 1
CELERY_BROKER_CONNECTION_RETRY_ON_STARTUP = True

# -- files ----------------------------------------------------------------------------------
STORAGES = {
    "default": {"BACKEND": "django.core.files.storage.FileSystemStorage"},
    "staticfiles": {"BACKEND": "django.contrib.staticfiles.storage.StaticFilesStorage"},
    "artifacts": {
        "BACKEND": env.string("AGENTSITE_STORAGE_BACKEND", "django.core.files.storage.FileSystemStorage"),
        "OPTIONS": {},
    },
}
_storage_location = env.string("AGENTSITE_STORAGE_LOCATION", str(VAR_DIR / "artifacts"))
if STORAGES["artifacts"]["BACKEND"].endswith("FileSystemStorage"):
    STORAGES["artifacts"]["OPTIONS"] = {"location": _storage_location}
else:
    bucket = env.raw("AGENTSITE_STORAGE_BUCKET")
    if not bucket:
        raise ImproperlyConfigured(
            "AGENTSITE_STORAGE_BUCKET is required when AGENTSITE_STORAGE_BACKEND is "
            f"{STORAGES['artifacts']['BACKEND']!r}"
        )
    STORAGES["artifacts"]["OPTIONS"] = {"bucket_name": bucket, "location": env.string("AGENTSITE_STORAGE_PREFIX", "")}

STATIC_URL = "static/"
STATIC_ROOT = VAR_DIR / "static"
MEDIA_ROOT = VAR_DIR / "media"

# -- model ------------------------------------------------------------------------------------
OPENAI_BASE_URL = env.url("OPENAI_BASE_URL", schemes=("http", "https"))
OPENAI_API_KEY = env.raw("OPENAI_API_KEY")
AGENTSITE_MODEL = env.string("AGENTSITE_MODEL", "gpt-4o-mini" if (OPENAI_BASE_URL or OPENAI_API_KEY) else "offline")
AGENTSITE_SUMMARY_MODEL = env.string("AGENTSITE_SUMMARY_MODEL", AGENTSITE_MODEL)
AGENTSITE_CONTEXT_WINDOW = env.integer("AGENTSITE_CONTEXT_WINDOW", None, minimum=256)
AGENTSITE_MODEL_TIMEOUT_S = env.integer("AGENTSITE_MODEL_TIMEOUT_S", 120)
AGENTSITE_MODEL_MAX_RETRIES = env.integer("AGENTSITE_MODEL_MAX_RETRIES", 3, minimum=0)

# -- runs ----------------------------------------------------------------------------------------
AGENTSITE_APP = env.string("AGENTSITE_APP", "agentsite")
AGENTSITE_DEFAULT_AGENT = env.string("AGENTSITE_DEFAULT_AGENT", "support")
AGENTSITE_MAX_MESSAGE_CHARS = env.integer("AGENTSITE_MAX_MESSAGE_CHARS", 32_000)
AGENTSITE_MAX_STEPS = env.integer("AGENTSITE_MAX_STEPS", 10)
AGENTSITE_HISTORY_EVENT_LIMIT = env.integer("AGENTSITE_HISTORY_EVENT_LIMIT", 400)
AGENTSITE_RUN_WAIT_TIMEOUT_S = env.integer("AGENTSITE_RUN_WAIT_TIMEOUT_S", 300)
# Each process beats for its runs; a run silent for longer than STALE is reaped as interrupted.
AGENTSITE_RUN_HEARTBEAT_S = env.integer("AGENTSITE_RUN_HEARTBEAT_S", 15)
AGENTSITE_RUN_STALE_S = env.integer("AGENTSITE_RUN_STALE_S", 60)
# Bodies larger than this are refused with 413 before they are parsed.
DATA_UPLOAD_MAX_MEMORY_SIZE = env.integer("AGENTSITE_MAX_BODY_BYTES", 1_048_576)

# -- auth and API ----------------------------------------------------------------------------------
AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
]
LOGIN_URL = "/admin/login/"

REST_FRAMEWORK = {
    "DEFAULT_AUTHENTICATION_CLASSES": [
        "runs.auth.BearerTokenAuthentication",
        "rest_framework.authentication.SessionAuthentication",
    ],
    "DEFAULT_PERMISSION_CLASSES": ["rest_framework.permissions.IsAuthenticated"],
    "DEFAULT_RENDERER_CLASSES": ["rest_framework.renderers.JSONRenderer"],
    "DEFAULT_PARSER_CLASSES": ["agentsite.api.fields.ObjectJSONParser"],
    "DEFAULT_SCHEMA_CLASS": "drf_spectacular.openapi.AutoSchema",
    "EXCEPTION_HANDLER": "agentsite.errors.exception_handler",
    "UNAUTHENTICATED_USER": "django.contrib.auth.models.AnonymousUser",
}
SPECTACULAR_SETTINGS = {
    "TITLE": "Agentsite API",
    "DESCRIPTION": "Run LLM agents as managed, durable, observable work.",
    "VERSION": "0.1.0",
    "SERVE_INCLUDE_SCHEMA": False,
}

LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = True
USE_TZ = True

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "handlers": {"console": {"class": "logging.StreamHandler"}},
    "root": {"handlers": ["console"], "level": env.string("AGENTSITE_LOG_LEVEL", "INFO")},
    "loggers": {"django.db.backends": {"level": "WARNING"}},
}
