"""The console's static files (index.html, console.js, console.css), a package so wheels carry them as package data."""
