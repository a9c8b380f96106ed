from __future__ import annotations

from django.contrib import admin
from django.contrib.auth import views as auth_views
from django.urls import path
from django.views.i18n import JavaScriptCatalog, set_language
from drf_spectacular.views import SpectacularAPIView, SpectacularRedocView, SpectacularSwaggerView

from agentsite.api.views import off_thread, served_off_thread
from agentsite.health import healthz
from evolution_app import apis as evolution_apis
from runs import trace_views as run_trace_views
from runs import views as run_views
from runs.surfaces import apis as run_apis
from runs.surfaces import openai_compat, openai_responses, turn_apis
from runs.surfaces.agui import views as agui_views
from runs.surfaces.rest_wait import awaiting_run
from sessions_app import apis as session_apis
from sessions_app import artifact_apis, memory_apis
from sessions_app import views as session_views
from skills_app import apis as skill_apis

# Every synchronous page and API view is served from the pool's threads (`off_thread`).
api = served_off_thread(
    [
        path("api/schema/", SpectacularAPIView.as_view(), name="api-schema"),
        path("api/docs/", SpectacularSwaggerView.as_view(url_name="api-schema"), name="api-docs"),
        path("api/redoc/", SpectacularRedocView.as_view(url_name="api-schema"), name="api-redoc"),
        path("api/agents/", run_apis.AgentListApi.as_view(), name="agent-list"),
        path("api/sessions/", session_apis.SessionListCreateApi.as_view(), name="session-list"),
        path("api/sessions/<str:session_id>/", session_apis.SessionDetailApi.as_view(), name="session-detail"),
        path("api/sessions/<str:session_id>/events/", session_apis.SessionEventsApi.as_view(), name="session-events"),
        path(
            "api/sessions/<str:session_id>/context/", session_apis.SessionContextApi.as_view(), name="session-context"
        ),
        path("api/sessions/<str:session_id>/state/", session_apis.SessionStateApi.as_view(), name="session-state"),
        path("api/sessions/<str:session_id>/pins/", run_apis.SessionPinsApi.as_view(), name="session-pins"),
        path(
            "api/sessions/<str:session_id>/regenerate/",
            off_thread(turn_apis.SessionRegenerateApi.as_view()),
            name="session-regenerate",
        ),
        path(
            "api/sessions/<str:session_id>/events/<str:event_id>/edit/",
            off_thread(turn_apis.SessionMessageEditApi.as_view()),
            name="session-message-edit",
        ),
        path(
            "api/sessions/<str:session_id>/artifacts/",
            artifact_apis.SessionArtifactListApi.as_view(),
            name="session-artifacts",
        ),
        path(
            "api/sessions/<str:session_id>/artifacts/<str:filename>",
            artifact_apis.SessionArtifactDetailApi.as_view(),
            name="session-artifact",
        ),
        path("api/memories/", memory_apis.MemoryListCreateApi.as_view(), name="memory-list"),
        path("api/memories/<str:memory_id>/", memory_apis.MemoryDetailApi.as_view(), name="memory-detail"),
        path("api/skills/", skill_apis.SkillListApi.as_view(), name="skill-list"),
        path("api/skills/<str:name>/", skill_apis.SkillDetailApi.as_view(), name="skill-detail"),
        path("api/evolution/candidates/", evolution_apis.CandidateListApi.as_view(), name="evolution-candidates"),
        path("api/runs/", awaiting_run(run_apis.RunCreateApi.as_view()), name="run-create"),
        path("api/runs/<str:run_id>/", run_apis.RunDetailApi.as_view(), name="run-detail"),
        path("api/runs/<str:run_id>/trace/", run_apis.RunTraceApi.as_view(), name="run-trace"),
        path("api/runs/<str:run_id>/cancel/", off_thread(run_apis.RunCancelApi.as_view()), name="run-cancel"),
        path("api/runs/<str:run_id>/resume/", off_thread(run_apis.RunResumeApi.as_view()), name="run-resume"),
        path("api/runs/<str:run_id>/messages/", off_thread(run_apis.RunMessagesApi.as_view()), name="run-messages"),
    ]
)

openai_compatible = [
    path("v1/chat/completions", openai_compat.chat_completions, name="openai-chat-completions"),
    path("v1/models", openai_compat.list_models, name="openai-models"),
    path("v1/models/<path:model_id>", openai_compat.retrieve_model, name="openai-model"),
    path("v1/responses", openai_responses.create_response, name="openai-responses"),
    path("v1/responses/<str:response_id>", openai_responses.retrieve_response, name="openai-response"),
]

agui = [
    path("agui/<str:agent>/cancel", agui_views.agui_cancel, name="agui-cancel"),
    path("agui/<str:agent>", agui_views.agui_run, name="agui-run"),
]

pages = served_off_thread(
    [
        path("", run_views.chat, name="chat"),
        path("chat/<str:session_id>/", run_views.chat, name="chat-session"),
        path("sessions/<str:session_id>/", session_views.session_ledger, name="session-ledger"),
        path("runs/<str:run_id>/trace/", run_trace_views.run_trace_page, name="run-trace-page"),
        path(
            "login/",
            auth_views.LoginView.as_view(template_name="auth/login.html", redirect_authenticated_user=True),
            name="login",
        ),
        path("logout/", auth_views.LogoutView.as_view(template_name="auth/logged_out.html"), name="logout"),
        path("healthz", healthz, name="healthz"),
        # The language switch (POST language, next; remembered in the django_language cookie) and
        # the JavaScript strings' catalog in the request's language (issue 21).
        path("i18n/setlang/", set_language, name="set_language"),
        path("jsi18n/", JavaScriptCatalog.as_view(), name="javascript-catalog"),
    ]
)

urlpatterns = [
    *pages,
    path("admin/", admin.site.urls),
    *api,
    *openai_compatible,
    *agui,
]

handler404 = "agentsite.errors.json_404"
handler500 = "agentsite.errors.json_500"
