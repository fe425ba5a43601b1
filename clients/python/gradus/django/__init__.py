"""Django backends for Gradus: sessions (gradus.django.sessions) and cache (gradus.django.cache)."""
