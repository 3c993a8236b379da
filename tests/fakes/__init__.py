"""Test doubles: scripted models for the scripted OpenAI-compatible server, naive references."""
