"""`main.py fix`: each diagnosis of a watched script with a mechanical fix, made as the
smallest source change on a copy of the user's file, run side by side with the original,
and the memory it gives back measured (docs/fix.md). Qt-free.

`table` says per diagnosis what fix applies, `edits` makes source changes from the syntax
tree, `uses` reads how a value is used later, `plan` turns diagnoses into fixes, `runs` runs
the two watched copies and reads their figures, `report` writes and prints the result,
`write` applies an accepted patch to the user's files, `engine` runs it all."""
