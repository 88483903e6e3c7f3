from .app import entry

entry()
