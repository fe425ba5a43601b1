from django.urls import path

from testsite import views

urlpatterns = [
    path("incr", views.incr),
    path("show", views.show),
    path("cache/<str:alias>/<str:op>", views.cache_op),
]
