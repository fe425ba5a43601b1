#!/usr/bin/env python3
"""The Django project of the integration tests (test_django_integration.py starts it with runserver)."""
import os
import sys

if __name__ == "__main__":
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "testsite.settings")
    from django.core.management import execute_from_command_line

    execute_from_command_line(sys.argv)
