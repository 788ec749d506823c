"""Made-up member names for the demo's big guild, in several scripts.

Deterministic (the same names on every machine), unique, and varied enough that
autocomplete is worth having: Latin names with and without accents, Chinese,
Japanese, Cyrillic and Greek ones.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator

LATIN_FIRST = """Ada Alan Alice Amara Anton Aria Arlo Astrid Bea Ben Bram Cara Cedric Clara Cora
Dale Dara Dean Dora Eli Elsa Emil Emma Enzo Erin Esme Ezra Fay Felix Finn Flora Gale Gemma Gideon
Greta Hana Hans Hazel Hugo Ida Ines Iris Ivan Jada Jake Jana Joel June Kai Kara Karl Kira Lars
Lena Leo Lia Lily Luca Luna Mae Mara Max Mila Milo Nell Nia Nico Nina Noah Nora Odin Olga Omar
Opal Otto Paz Pia Quinn Rafe Rhea Rita Ron Rosa Ruby Ruth Sam Sara Seth Sia Sven Tara Ted Tess
Theo Tia Uma Una Vera Vic Wade Wren Xavi Yara Yuri Zane Zara Zoe""".split()
LATIN_LAST = """Abbott Ackerman Adler Ainsley Baker Barrow Becker Bishop Blake Bower Brandt
Brooks Carter Castle Clark Cole Cooper Crane Dalton Dawson Dixon Drake Dunn Ellis Emery Evans
Fairley Fisher Fleming Ford Foster Fox Garner Gates Graham Grant Gray Hale Hardy Harlow Hayes
Hicks Holt Hunter Ingram Irwin Jensen Jordan Kane Keller Kemp Knight Lane Lang Larsen Lawson
Lowe Lynch Mason Meyer Miles Moss Nash Nolan North Oakley Olsen Owens Page Parker Pike Porter
Quill Ramsey Reed Reyes Riley Rowe Ryder Sawyer Shaw Stone Strand Sutton Tate Thorne Tucker
Vance Vaughn Wade Walsh Ward Webb West Wilder Wolfe Wright Young""".split()
ACCENTED_FIRST = """Ærwyn Åsa Agnès Anaïs Andrés Ángel Björn Bérénice Céline César Chloé
Dörte Éloïse Émile Élodie Eșref Fañch Gaël Görkem Hélène Héctor Ígor Iñaki Jérôme Jürgen Kübra
Léa Łucja Lúcia Mïa Nadège Noé Ørjan Ömer Paweł Raphaël Renée Šárka Søren Stéphane Thaïs Tomáš
Ulrike Ümit Valérie Václav Yağmur Zoë Žofie Ðorđe""".split()
ACCENTED_LAST = """Åberg Álvarez Barış Béranger Brønsted Čapek Dvořák Ekström Færøy Fernández
García Gómez Grünewald Håkansson Hernández Ibáñez Jiménez Křížek König Lindqvist Łukasik Martínez
Müller Muñoz Novák Núñez Öztürk Peña Pérez Rodríguez Sánchez Schröder Søndergaard Szabó Thérien
Ulvæus Vélez Wójcik Yılmaz Zúñiga""".split()
CJK_SURNAMES = list(
    "王李张刘陈杨黄赵吴周徐孙马朱胡郭何高林罗郑梁谢宋唐许韩冯邓曹彭曾萧田董潘袁蔡蒋余于杜叶程魏苏吕丁任卢姚沈钟姜崔谭陆范汪廖石金韦贾夏付方邹熊白孟秦邱侯江尹薛闫段雷龙黎史陶贺毛郝顾龚邵万覃武钱戴严欧莫孔向常汤康易乔赖文"
)
CJK_GIVEN = list("伟芳娜敏静丽强磊军洋勇艳杰娟涛明超秀霞平刚桂英华玉兰红云飞鹏辉建国文斌宇浩")
JAPANESE = """佐藤 鈴木 高橋 田中 伊藤 渡辺 山本 中村 小林 加藤 吉田 山田 佐々木 山口 松本 井上 木村 林 清水
山崎""".split()
JAPANESE_GIVEN = """さくら ひなた ゆい あおい はると そうた ゆうと りく 蓮 陽翔 結衣 凛 湊 葵 陽菜 大和""".split()
CYRILLIC_FIRST = """Александр Алексей Анна Борис Вера Виктор Галина Дмитрий Екатерина Елена
Иван Игорь Ирина Кирилл Ксения Лариса Максим Мария Наталья Никита Николай Ольга Павел Полина
Роман Светлана Сергей Татьяна Юлия Ярослав""".split()
CYRILLIC_LAST = """Абрамов Белов Васильев Волков Глебов Давыдов Егоров Жуков Зайцев Иванов
Казаков Кузнецов Лебедев Морозов Новиков Орлов Павлов Попов Романов Семёнов Смирнов Соколов
Тарасов Фёдоров Филиппов Харитонов Цветков Чернов Шевченко Яковлев""".split()
GREEK_FIRST = """Αθηνά Αλέξανδρος Άννα Γιώργος Δημήτρης Ελένη Ευάγγελος Ιωάννα Κατερίνα
Κωνσταντίνος Μαρία Νίκος Παναγιώτης Σοφία Χρήστος""".split()
GREEK_LAST = """Αντωνίου Γεωργίου Δημητρίου Ιωάννου Καραγιάννης Κωνσταντίνου Νικολάου
Οικονόμου Παπαδόπουλος Παππάς Σταματόπουλος Χριστοδούλου""".split()


def _pairs(firsts: list[str], lasts: list[str], sep: str = " ") -> Iterator[str]:
    return (first + sep + last for last, first in itertools.product(lasts, firsts))


def _scripts() -> list[Iterator[str]]:
    initials = "ABCDEFGHJKLMNPRSTVW"
    return [
        _pairs(LATIN_FIRST, LATIN_LAST),
        _pairs(ACCENTED_FIRST, ACCENTED_LAST),
        (s + a + b for a, b in itertools.product(CJK_GIVEN, repeat=2) for s in CJK_SURNAMES),
        _pairs(CYRILLIC_FIRST, CYRILLIC_LAST),
        # Written as in Japanese: family name first, no space (山田さくら): 山 finds 山田.
        _pairs(JAPANESE, JAPANESE_GIVEN, sep=""),
        _pairs(GREEK_FIRST, GREEK_LAST),
        (f"{f} {i}. {last}" for i in initials for last in LATIN_LAST for f in LATIN_FIRST),
        (f"{f} {i}. {last}" for i in initials for last in ACCENTED_LAST for f in ACCENTED_FIRST),
    ]


def guild_names(count: int) -> Iterator[str]:
    """``count`` distinct names, interleaving the scripts until each runs out."""
    seen: set[str] = set()
    sources = _scripts()
    while sources and len(seen) < count:
        for source in list(sources):
            name = next(source, None)
            if name is None:
                sources.remove(source)
            elif name not in seen:
                seen.add(name)
                yield name
                if len(seen) == count:
                    return
