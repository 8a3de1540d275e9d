"""What every rung of the ladder uses: errors, the atomic writer, safe text, user files and JSON, the typed reader, versions, process lifelines."""
