"""The admin's model names and field labels in English and Simplified Chinese (issue 21):
every model and field has a `gettext_lazy` verbose name, and the migrations record them."""

from __future__ import annotations

import io
from typing import Any

import pytest
from django.apps import apps
from django.core.management import call_command
from django.utils import translation

pytestmark = pytest.mark.django_db

ZH = {"HTTP_ACCEPT_LANGUAGE": "zh-CN,zh;q=0.9"}
EN = {"HTTP_ACCEPT_LANGUAGE": "en"}
APPS = ("runs", "sessions_app", "skills_app", "evolution_app")


def test_the_admin_index_names_the_models_in_chinese(admin_client: Any) -> None:
    chinese = admin_client.get("/admin/", **ZH).content.decode()
    english = admin_client.get("/admin/", **EN).content.decode()
    for zh, en in [
        ("远程智能体", "Remote agents"),
        ("技能候选", "Skill candidates"),
        ("记忆", "Memories"),
        ("会话", "Sessions"),
    ]:
        assert zh in chinese and en not in chinese
        assert en in english


def test_a_form_labels_its_fields_in_chinese(admin_client: Any) -> None:
    chinese = admin_client.get("/admin/runs/remoteagent/add/", **ZH).content.decode()
    english = admin_client.get("/admin/runs/remoteagent/add/", **EN).content.decode()
    for zh, en in [("名称", "Name:"), ("描述", "Description:"), ("作为智能体", "As agent"), ("已启用", "Enabled")]:
        assert zh in chinese and en not in chinese
        assert en in english


def test_every_model_and_field_of_the_apps_has_a_translated_name() -> None:
    untranslated = []
    with translation.override("zh-hans"):
        for label in APPS:
            for model in apps.get_app_config(label).get_models():
                names = [("model", str(model._meta.verbose_name)), ("plural", str(model._meta.verbose_name_plural))]
                names += [(f.name, str(f.verbose_name)) for f in model._meta.fields]
                untranslated += [
                    f"{model.__name__}.{what}: {text}"
                    for what, text in names
                    if text.isascii() and text not in ("ID", "URL", "SHA-256")
                ]
    assert untranslated == []


def test_the_migrations_record_every_model_change() -> None:
    out = io.StringIO()
    call_command("makemigrations", *APPS, check=True, dry_run=True, stdout=out)
    assert "No changes detected" in out.getvalue()
