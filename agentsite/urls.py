from __future__ import annotations

from django.contrib import admin
from django.urls import path
from django.views.generic import TemplateView
from drf_spectacular.views import SpectacularAPIView

from agentsite.api.views import off_thread
from agentsite.health import healthz
from runs import apis as run_apis
from runs import openai_compat
from sessions_app import apis as session_apis

api = [
    path("api/schema/", SpectacularAPIView.as_view(), name="api-schema"),
    path("api/agents/", run_apis.AgentListApi.as_view(), name="agent-list"),
    path("api/sessions/", session_apis.SessionListCreateApi.as_view(), name="session-list"),
    path("api/sessions/<str:session_id>/", session_apis.SessionDetailApi.as_view(), name="session-detail"),
    path("api/sessions/<str:session_id>/events/", session_apis.SessionEventsApi.as_view(), name="session-events"),
    path("api/runs/", off_thread(run_apis.RunCreateApi.as_view()), name="run-create"),
    path("api/runs/<str:run_id>/", run_apis.RunDetailApi.as_view(), name="run-detail"),
    path("api/runs/<str:run_id>/cancel/", off_thread(run_apis.RunCancelApi.as_view()), name="run-cancel"),
]

openai_compatible = [
    path("v1/chat/completions", openai_compat.chat_completions, name="openai-chat-completions"),
    path("v1/models", openai_compat.list_models, name="openai-models"),
]

urlpatterns = [
    path("", TemplateView.as_view(template_name="index.html"), name="home"),
    path("healthz", healthz, name="healthz"),
    path("admin/", admin.site.urls),
    *api,
    *openai_compatible,
]

handler404 = "agentsite.errors.json_404"
handler500 = "agentsite.errors.json_500"
