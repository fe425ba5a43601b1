from django.urls import path

from testsite import views

urlpatterns = [
    path("incr", views.incr),
    path("show", views.show),
    path("login", views.login),
    path("logout", views.logout),
    path("key", views.key),
    path("cache/<str:alias>/<str:op>", views.cache_op),
]
