bad syntax here (
