"""_report"""
