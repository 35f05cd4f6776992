"""The dashboard's static page (index.html, app.js, style.css), served by node/api/web.py.

A package only so that setuptools ships the files as its package data; no Python lives here.
"""
