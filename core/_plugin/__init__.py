"""_plugin"""
