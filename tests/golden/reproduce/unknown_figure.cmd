# An unknown figure: the error lists the figures there are.
reproduce 7
